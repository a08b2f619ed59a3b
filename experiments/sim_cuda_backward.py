"""Can simulated devices and CUDA autograd share one process? (feeds the devices chapter's
table and the README's one-GPU note; run on a GPU machine, one variant per fresh process:
``python experiments/sim_cuda_backward.py``)."""

import subprocess
import sys

VARIANTS = {
    "no simulated devices": "",
    "sim registered, engine unpatched": (
        "from torch.utils import backend_registration as br\n"
        "from learn_parallel.sim import backend\n"
        "module = backend._DeviceModule()\n"
        "br._setup_privateuseone_for_python_backend('sim', backend_module=module)\n"
    ),
    "learn_parallel.sim.enable()": ("from learn_parallel import sim\nsim.enable()\n"),
    "enable(), backward single-threaded": (
        "from learn_parallel import sim\nsim.enable()\n"
        "torch.autograd.set_multithreading_enabled(False).__enter__()\n"
    ),
}
STEP = (
    "net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))\n"
    "net = net.cuda()\n"
    "net(torch.randn(4, 8, device='cuda')).sum().backward()\n"
    "print('backward on cuda:0 ok')\n"
)

for name, setup in VARIANTS.items():
    done = subprocess.run(
        [sys.executable, "-c", "import torch\n" + setup + STEP], capture_output=True, text=True
    )
    last = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["(no output)"]
    print(f"{name:40} -> {last[0][:150]}")
