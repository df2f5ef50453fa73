#!/usr/bin/env bash
# Idempotent Python setup for tools/export: creates .venv at the repo root (if missing) and installs
# tools/export/requirements.txt, skipping the install when .venv/.requirements.sha matches its sha256.
# Needs python3 (>= 3.11) with the venv module (Debian: apt-get install python3 python3-venv).
# Env: PYTHON (default python3), VENV (default <repo>/.venv), FORCE=1 to reinstall.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-$ROOT/.venv}"
REQ="$ROOT/tools/export/requirements.txt"
STAMP="$VENV/.requirements.sha"

"$PYTHON" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"python >= 3.11 required, found {sys.version.split()[0]}")
PY

if [ ! -x "$VENV/bin/python" ]; then
    echo "creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
# keep the venv out of git without touching the repo's .gitignore
[ -f "$VENV/.gitignore" ] || echo '*' > "$VENV/.gitignore"

want="$(sha256sum "$REQ" | cut -d' ' -f1)"
have="$(cat "$STAMP" 2>/dev/null || true)"
if [ "${FORCE:-0}" != 1 ] && [ "$want" = "$have" ]; then
    echo "requirements up to date ($VENV)"
    exit 0
fi

# torch from PyPI is the CUDA build (~7 GB with its nvidia-* wheels); it also runs on CPU-only machines.
"$VENV/bin/python" -m pip install --upgrade pip
"$VENV/bin/python" -m pip install -r "$REQ"
"$VENV/bin/python" -c "import torch, torchvision, transformers, torch_ir, safetensors; print('torch', torch.__version__, '| transformers', transformers.__version__, '| torch_ir', torch_ir.__version__)"
echo "$want" > "$STAMP"
echo "installed into $VENV"
