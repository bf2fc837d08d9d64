"""The in-process side: needs executorch. The hook around `to_executorch`'s serializer, the
start-up hook, the config, pruning the emitter's output and its named data, the reports."""
