"""tests/gpu/kernel_table.py (the per-kernel GPU-time table of tests/gpu/kernel_profile.sh) on a made-up
Nsight Compute CSV: kernels grouped by name per run, and the time by kind (library products, cuDNN
attention, generated kernels, kiln's own kernels, other)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "gpu", "kernel_table.py")

ROWS = [  # (kernel, nanoseconds) of one run; the CSV holds two runs
    ("nvjet_sm90_hsh_192x192_64x3_1x2_h_bz_coopB_NNN", 70000),
    ("nvjet_sm90_hsh_192x192_64x3_1x2_h_bz_coopB_NNN", 70000),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16", 40000),
    ("kiln_pointwise", 30000),
    ("void kiln::<unnamed>::layer_norm_rows_kernel<__half, 32, 4>(kiln::LayerNormArgs)", 15000),
    ("void at::native::elementwise_kernel<128, 4>", 5000),
]


def test_kinds_and_per_run_figures(tmp_path):
    lines = ['"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"']
    for run in range(2):
        for i, (name, ns) in enumerate(ROWS):
            lines.append(f'"{run * 10 + i}","{name}","gpu__time_duration.sum","nsecond","{ns:,}"')
    csv_path = tmp_path / "ncu.csv"
    csv_path.write_text("==PROF== preamble\n" + "\n".join(lines) + "\n")
    out = subprocess.run([sys.executable, SCRIPT, str(csv_path), "--runs", "2", "--top", "2"], capture_output=True,
                         text=True, check=True).stdout
    table, kinds = out.split("where the time goes")
    assert len(table.strip().splitlines()) == 4  # the header, the two kernels --top lets through, the total
    assert "nvjet_sm90" in table and "kiln_pointwise" not in table
    assert "230.0" in table  # 230 us a run in all
    rows = {line[:70].strip(): line[70:].split() for line in kinds.splitlines()[1:] if line.strip()}
    assert rows["library products (cuBLAS/cuBLASLt/CUTLASS)"] == ["2.0", "140.0", "60.9"]
    assert rows["library attention (cuDNN SDPA)"] == ["1.0", "40.0", "17.4"]
    assert rows["generated (kiln.Pointwise / Triton)"] == ["1.0", "30.0", "13.0"]
    assert rows["kiln's own kernels"] == ["1.0", "15.0", "6.5"]
    assert rows["other"] == ["1.0", "5.0", "2.2"]
