"""mxnet-amp: automatic mixed precision (float16 / bfloat16) for Apache MXNet 1.9."""
from setuptools import setup

# mxnet 1.9.1 breaks with numpy >= 1.24; gluoncv 0.10.5 needs these upper bounds to stay
# on numpy 1.x (plain opencv-python pulls numpy 2 in)
NUMPY = "numpy==1.23.5"
# onnx 1.14 is the last with onnx.mapping, which MXNet 1.9.1's exporter (mx.onnx) reads
ONNX = ["onnx==1.14.1"]
DISTRIBUTED = "distributed>=2024.1"
GLUONCV = ["gluoncv==0.10.5.post0", "opencv-python-headless<4.9", "scipy<1.12",
           "matplotlib<3.9", "pandas<2.1", "Pillow<11"]

setup(
    name="mxnet-amp",
    version="0.1.0",
    description="Automatic mixed precision (float16/bfloat16) for Apache MXNet 1.9 models",
    long_description=open("README.md").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=["mxnet_amp", "mxnet_amp.auto", "mxnet_amp.auto.checks", "mxnet_amp.auto.culprits",
              "mxnet_amp.cli", "mxnet_amp.files", "mxnet_amp.gluon", "mxnet_amp.ir", "mxnet_amp.kernels",
              "mxnet_amp.lists", "mxnet_amp.mx", "mxnet_amp.onnx", "mxnet_amp.passes", "mxnet_amp.report",
              "mxnet_amp.shape_check", "mxnet_amp.tune"],
    # the op lists live at the top of the repository and ship inside the package
    package_dir={"mxnet_amp.lists": "lists"},
    package_data={"mxnet_amp.lists": ["*.toml"], "mxnet_amp.kernels": ["*.cc"]},
    install_requires=[NUMPY, "tqdm>=4.60"],
    extras_require={
        "cpu": ["mxnet==1.9.1"],
        "gpu": ["mxnet-cu112==1.9.1"],
        "zoo": GLUONCV,
        "test": ["pytest>=7", "hypothesis>=6", "pdoc>=16,<17", "scikit-learn>=1.3", "mypy>=1.10",
                 DISTRIBUTED] + GLUONCV + ONNX,
        # ONNX export (mxnet_amp.export_onnx, mxnet-amp export-onnx); onnxruntime declares
        # numpy>=1.24 from 1.16 on, so it is no extra: docs/onnx.md installs it --no-deps
        "onnx": ONNX,
        "docs": ["pdoc>=16,<17"],
        # auto's batches on a Dask cluster (auto_convert_model(client=...)); installs beside
        # numpy 1.23.5 without touching it
        "dist": [DISTRIBUTED],
        "png": ["cairosvg"],
        # gluonnlp 0.10 builds a Cython extension: install cython, wheel and setuptools<70
        # first, then this extra with --no-build-isolation (README "Set up")
        "nlp": ["gluonnlp==0.10.0", "cython", "wheel"],
    },
    entry_points={"console_scripts": ["mxnet-amp=mxnet_amp.cli.main:run"]},
    classifiers=["Programming Language :: Python :: 3", "License :: OSI Approved :: Apache Software License"],
)
