import time
import unittest

from sglang.test.ci.ci_register import register_amd_ci, register_cuda_ci
from sglang.test.probe import visible_gpus

register_cuda_ci(est_time=4, stage="stage-b", runner_config="2-gpu-large")
register_amd_ci(est_time=4, stage="stage-b", runner_config="2-gpu-amd-mi35x")


class TestTp2(unittest.TestCase):
    def test_generate(self):
        time.sleep(1.0)
        self.assertEqual(len(visible_gpus()), 2)


if __name__ == "__main__":
    unittest.main()
