"""asv suites of perfguard (``benchmark_dir`` of ``asv.conf.json``); see ``bench_attention``."""
