import time
import unittest

from sglang.test.ci.ci_register import register_amd_ci

register_amd_ci(est_time=2, stage="stage-b", runner_config="1-gpu-small-amd-mi35x")


class TestSamplingParams(unittest.TestCase):
    def test_top_p(self):
        time.sleep(0.5)


if __name__ == "__main__":
    unittest.main()
