"""The measuring engine: how one fresh process turns the asv suite into validated numbers.

The data flows through these modules in this order (docs/design.md, "Module map"):

1. ``machine``: what hardware and software the numbers are of (the store's machine key).
2. ``timing``, ``work``, ``communication``: the instruments — the timer (CUDA graphs, events; a
   package: the CPU and CUDA timers, NVML readings, peak memory), the work counters (FLOPs, aten
   ops, bytes, kernels), a distributed call's communication.
3. ``suite``: what the asv suite's benchmarks measure and how they are named and selected.
4. ``cases``: one implementation at a profile's shape, built and fed (``shards``: a rank's share
   of one in a distributed round; ``rank_group``: launching and joining the group).
5. ``passes``: one measuring pass of a case (first call, memory, work, capture, timing), once per
   process; ``fallbacks``: a switch of path inside a pass fails the case.
6. ``outcomes``: what a benchmark hands the worker beyond asv's one number.
7. ``round_worker``: the fresh process that measures a round; ``round_protocol``: the spec it is
   given and the event lines it writes, typed and checked; ``round_output``: its lines read back
   as records; ``rounds``: starting workers, surviving their crashes, the round.

Nothing here knows the store, the comparison or the reports: the commands (``measuring``,
``gate``, ...) drive the engine and keep what it returns.
"""
