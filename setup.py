"""The one compiled part: the store's segment walker (broker/store/_walk.c, docs/store.md).

Optional: without a C compiler and Python's headers the install goes on, and recovery uses
the pure-Python walker (the same records, about 2x slower: docs/benchmarks.md, issue 12).
Everything else is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "broker.store._walk",
            ["broker/store/_walk.c"],
            depends=["broker/store/_crc32c.h"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
