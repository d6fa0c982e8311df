"""Rewrites a GGUF model with every quantised tensor dequantised to BF16 (1-D tensors to `F32`).

Why: the prebuilt llama.cpp server on PyPI dies with SIGILL on CPUs without AVX-VNNI, but only
in its legacy-quantisation kernels (q4_0/q4_1/q5_x/q8_0). Its BF16, `F16` and `F32` kernels run on
every x86-64 CPU, so one conversion (seconds, no compiler) makes the same server run everywhere.

    python to_bf16.py INPUT.gguf OUTPUT.gguf

The output is written beside OUTPUT under a temporary name and renamed into place, so an
interrupted conversion never leaves a truncated model that a later run would take as done.
"""

import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

# Types the prebuilt server computes with on any CPU (`F32`, `F16`, BF16): copied as they are.
PORTABLE = {Q['F32'], Q['F16'], Q.BF16}


def convert(src: str, dst: str) -> None:
    reader = gguf.GGUFReader(src)
    arch_field = reader.get_field(gguf.Keys.General.ARCHITECTURE)
    if arch_field is None:
        raise SystemExit(f"{src}: no {gguf.Keys.General.ARCHITECTURE} field; not a model file")
    arch = arch_field.contents()
    tmp = dst + ".partial"
    writer = gguf.GGUFWriter(tmp, arch, endianess=reader.endianess)

    for field in reader.fields.values():
        # The writer emits the architecture and the GGUF.* header fields itself.
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name == gguf.Keys.General.FILE_TYPE:
            value = int(gguf.LlamaFileType.MOSTLY_BF16)
        writer.add_key_value(field.name, value, value_type, sub_type=sub_type)

    for tensor in reader.tensors:
        if tensor.tensor_type in PORTABLE:
            writer.add_tensor(tensor.name, np.asarray(tensor.data), raw_dtype=tensor.tensor_type)
            continue
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        if values.ndim <= 1:
            writer.add_tensor(tensor.name, values.astype(np.float32))
        else:
            packed = gguf.quants.quantize(values, Q.BF16)
            writer.add_tensor(tensor.name, packed, raw_dtype=Q.BF16)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, dst)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: to_bf16.py INPUT.gguf OUTPUT.gguf")
    convert(sys.argv[1], sys.argv[2])
