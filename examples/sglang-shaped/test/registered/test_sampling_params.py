import time
import unittest

from ci_register import register_amd_ci

register_amd_ci(est_time=2, suite="stage-b-test-small-1-gpu-amd")


class TestSamplingParams(unittest.TestCase):
    def test_top_p(self):
        time.sleep(0.5)


if __name__ == "__main__":
    unittest.main()
