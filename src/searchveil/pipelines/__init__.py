"""Pipelines: whole jobs built from the floors below — read, release, evaluate, report — as
library calls the CLI wraps (:func:`searchveil.pipelines.demo.demo`, ``searchveil demo``)."""
