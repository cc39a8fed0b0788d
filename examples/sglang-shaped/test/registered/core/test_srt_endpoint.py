import os
import time
import unittest

from sglang.test.ci.ci_register import register_amd_ci, register_cuda_ci
from sglang.test.probe import visible_gpus

register_cuda_ci(est_time=3, stage="stage-b", runner_config="1-gpu-small")
register_amd_ci(est_time=3, stage="stage-b", runner_config="1-gpu-small-amd-mi35x")


class TestSrtEndpoint(unittest.TestCase):
    def test_generate(self):
        time.sleep(1.0)
        self.assertEqual(len(visible_gpus()), 1)
        nodes = sorted(n for n in os.listdir("/dev/dri") if n.startswith("renderD"))
        print("render nodes: " + ",".join(nodes))

    def test_the_jobs_env_reached_the_test(self):
        self.assertEqual(os.environ.get("SGLANG_AMD_CI"), "1")
        print("job env: SGLANG_AMD_CI=1, SGLANG_IS_IN_CI=" + os.environ["SGLANG_IS_IN_CI"])


if __name__ == "__main__":
    unittest.main()
