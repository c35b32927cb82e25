// backends/cpu/misc_kernels.h — the files of the misc kernel family; register_misc calls each.
#pragma once

#include "backends/kernel.h"

namespace kiln::cpu {

void register_resize(KernelRegistry& r);   // misc_resize.cpp: Resize, Upsample
void register_einsum(KernelRegistry& r);   // misc_einsum.cpp: Einsum
void register_unique(KernelRegistry& r);   // misc_unique.cpp: Unique
void register_random(KernelRegistry& r);   // misc_random.cpp: RandomNormal/Uniform(+Like), Bernoulli, Multinomial
void register_signal(KernelRegistry& r);   // misc_signal.cpp: DFT, STFT, windows, MelWeightMatrix
void register_string(KernelRegistry& r);   // misc_string.cpp: StringNormalizer, StringConcat, StringSplit, RegexFullMatch
void register_detect(KernelRegistry& r);   // misc_detect.cpp: NonMaxSuppression, Det

}  // namespace kiln::cpu
