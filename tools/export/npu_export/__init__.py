"""Export PyTorch models to torch_ir IR JSON plus reference weights and I/O (see tools/export/README.md).

Importing the package makes torch_ir record absent optional tensor arguments
(``python/npu/_torch_ir_compat.py``, loaded by path: the export tool runs before the ``npu``
package is built), so every IR this tool writes says which of ``weight``/``bias`` or
``min``/``max`` a lone tensor is.
"""

import importlib.util
from pathlib import Path

__version__ = "0.1.0"

_COMPAT = Path(__file__).resolve().parents[3] / "python" / "npu" / "_torch_ir_compat.py"


def _record_absent_tensors() -> None:
    spec = importlib.util.spec_from_file_location("npu_torch_ir_compat", _COMPAT)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {_COMPAT}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.record_absent_tensors()


_record_absent_tensors()
