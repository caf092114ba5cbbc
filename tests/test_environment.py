"""What every results file records about the machine: the CPU's instruction set and the C++ kernel's build."""

import torch

from normlab.norms.backends import cpp
from normlab.runtime import environment
from normlab.study.pages import reproducibility


def test_instruction_set_names_what_torch_dispatches_to_and_only_known_flags():
    isa = environment.cpu_instruction_set()
    assert isa["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert set(isa["simd"]) <= set(environment.SIMD_FLAGS)


def test_hardware_carries_instruction_set_and_cpp_build():
    hw = environment.hardware()
    assert hw["cpu_instruction_set"] == environment.cpu_instruction_set()
    assert hw["cpp_kernel_build"]["flags"] == list(cpp.flags())


def test_cpp_build_info_without_a_compiler_says_why(monkeypatch):
    def no_compiler():
        raise cpp.KernelBuildError("backend='cpp' needs a C++ compiler")

    monkeypatch.setattr(cpp, "_compiler", no_compiler)
    cpp.build_info.cache_clear()
    try:
        info = cpp.build_info()
    finally:
        cpp.build_info.cache_clear()
    assert info["compiler"] is None and "C++ compiler" in info["why_none"]


def test_reproducibility_page_shows_the_instruction_set_and_says_when_a_file_predates_it():
    recorded = {
        "hardware": {
            "cpu_instruction_set": {"torch_cpu_capability": "AVX512", "simd": ["avx512f"]},
            "cpp_kernel_build": {
                "compiler": "g++",
                "compiler_version": "g++ (Debian 12.2.0-14) 12.2.0",
                "native_arch": "sapphirerapids",
            },
        }
    }
    assert reproducibility.instruction_set(recorded) == "AVX512; C++ kernel g++ 12.2.0, -march=native = sapphirerapids"
    assert reproducibility.instruction_set({"hardware": {"cpu": "old"}}) == "not recorded"
