import time
import unittest

from ci_register import register_amd_ci, register_cuda_ci
from probe import visible_gpus

register_cuda_ci(est_time=3, suite="stage-b-test-small-1-gpu")
register_amd_ci(est_time=3, suite="stage-b-test-small-1-gpu-amd")


class TestSrtEndpoint(unittest.TestCase):
    def test_generate(self):
        time.sleep(1.0)
        self.assertEqual(len(visible_gpus()), 1)


if __name__ == "__main__":
    unittest.main()
