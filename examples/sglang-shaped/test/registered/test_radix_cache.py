import time
import unittest

from ci_register import register_amd_ci, register_cuda_ci

register_cuda_ci(est_time=2, suite="stage-b-test-small-1-gpu")
register_amd_ci(est_time=2, suite="stage-b-test-small-1-gpu-amd")


class TestRadixCache(unittest.TestCase):
    def test_hit(self):
        time.sleep(0.5)


if __name__ == "__main__":
    unittest.main()
