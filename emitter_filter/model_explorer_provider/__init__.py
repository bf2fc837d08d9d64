"""A Model Explorer node data provider: the bytes each node of a `.pte` reads.

Loaded by Model Explorer (`ai-edge-model-explorer` >= 0.1.31) beside Arm's PTE adapter:
`model-explorer model.pte --extensions=pte_adapter_model_explorer,emitter_filter.model_explorer_provider`
(Model Explorer imports `emitter_filter.model_explorer_provider.main`). Only that module
imports `model_explorer`; nothing else of the package imports it.
"""
