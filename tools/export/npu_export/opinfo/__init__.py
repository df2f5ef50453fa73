"""OpInfo conformance suite: PyTorch's own OpInfo samples, one op per graph, through ``npu run``.

``python -m npu_export.opinfo run`` exports every in-scope OpInfo sample as a one-op module with torch_ir
(cached under ``target/opinfo``), runs each case with the ``npu`` binary in f32 and compares with PyTorch
eager. Modules: ``scope`` (which OpInfos and samples), ``export`` (sample -> IR + io files), ``check``
(run one case, compare, classify), ``report`` (per-op status, JSON, the docs table, the CI verdict).
"""
