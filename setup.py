"""Builds the optional native decoder; everything else is in pyproject.toml.

The extension is optional: without a C compiler the install still succeeds and the library
decodes with the protobuf runtime (torch_tfrecord warns once when it does).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "torch_tfrecord.support._native",
            sources=["torch_tfrecord/support/_native.c"],
            extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
            optional=True,
        )
    ]
)
