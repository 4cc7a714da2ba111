test -x .venv/bin/python || { python3 -m venv .venv && echo /opt/torch/.venv/lib/python3.12/site-packages > .venv/lib/python3.12/site-packages/_base.pth && .venv/bin/pip install -q --no-index --no-deps .whl/*.whl && .venv/bin/pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1; }
export PATH=$PWD/.venv/bin:$PATH
timeout 330 .venv/bin/python -m pytest -m gpu -n 8 -v -p no:cacheprovider tests/stages/test_stages_gpu.py tests/engine/test_bench_extras.py tests/engine/test_bench_baselines.py tests/engine/test_bench.py -k "stage or extra or baseline or slows_the_baselines or correct_kernel_against_both or side_stream or cuda_graph or work_left" > $OUT/gpu_tests.txt 2>&1; echo "rc=$?" >> $OUT/gpu_tests.txt
tail -25 $OUT/gpu_tests.txt
