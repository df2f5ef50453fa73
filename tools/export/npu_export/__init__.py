"""Export PyTorch models to torch_ir IR JSON plus reference weights and I/O (see tools/export/README.md)."""

__version__ = "0.1.0"
