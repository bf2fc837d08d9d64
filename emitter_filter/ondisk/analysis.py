"""The one analysis of a file that `audit`, `prune` and `dedupe` share.

`classify_file_named_data` applies the hook's named-data rules to a `PteFile`.
"""

from __future__ import annotations

from emitter_filter.named_keys import NamedDataUse, classify_named_keys
from emitter_filter.ondisk.file_model import PteFile
from emitter_filter.reachability import DataSpace

__all__ = ["classify_file_named_data"]


def classify_file_named_data(pte: PteFile) -> NamedDataUse:
    """Which named-data keys of a file its delegates can reach: the hook's rules, on disk.

    The roots are every plan's `delegates` entries (`named_data` module
    docstring); the keys are `pte.named_data` less the external constants'
    fully qualified names, which are tensor data, not named data. `audit` counts
    and `prune` drops exactly `dead`.

    Args:
        pte: What `read_pte` returned. Not modified.
    """
    plan_position = {plan.name: position for position, plan in enumerate(pte.plans)}
    uses = sorted(
        ((ref, blob.named_keys) for blob in pte.delegates for ref in blob.users),
        key=lambda use: (plan_position[use[0].plan], use[0].index),
    )
    external_fqns = {t.name for t in pte.tensors if t.ref.space is DataSpace.EXTERNAL}
    return classify_named_keys(
        [(ref, None if keys is None else tuple(sorted(keys))) for ref, keys in uses],
        [entry.key for entry in pte.named_data if entry.key not in external_fqns],
    )
