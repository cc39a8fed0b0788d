import time
import unittest

from sglang.test.ci.ci_register import register_amd_ci
from sglang.test.probe import visible_gpus

register_amd_ci(5, "nightly-amd-8-gpu-mi35x", True)  # nightly, positionally


class TestDeepseek(unittest.TestCase):
    def test_eight_gpus(self):
        time.sleep(1.0)
        self.assertEqual(len(visible_gpus()), 8)
        print("deepseek on 8 GPUs: ok")


if __name__ == "__main__":
    unittest.main()
