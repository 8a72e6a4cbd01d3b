"""The GPU benchmark (``python -m loadtest.bench --mode gpu``, ``make bench-gpu``): export on the GPU,
serve with KIND_GPU instances and measure batching there, side by side in one run. ``--dry-run`` runs
the same plan on the CPU with tiny counts, the export included (fp32, for a CPU), so the plumbing is
tested where no GPU is."""
