"""`make bench`: the desk's figures next to the floors they stand on, measured in one run.

`python -m bench.run` (BENCH=short for a few seconds a figure, as CI runs it; full otherwise).
Nothing here is imported by the desk: the probe, the world and the floor apps are loaded only
into the processes the harness starts.
"""
