"""Run the peer's LLM exporter (torch-to-nnef-llm's ``t2n_export_llm_to_tract``) offline.

    PEER_VENV/bin/python bench/peer_llm_export.py -e OUT_DIR -d MODEL_DIR --no-verify ...

Run by :mod:`bench.llm_peer_bench` with the PEER's interpreter (a separate venv: the peer is
never a dependency of t2n, and this file imports nothing of t2n). Two things stand between
its command line and an offline machine with transformers 5.x, and this wrapper arranges
both without changing what the peer exports:

* its patched ``DynamicLayer.update`` does not accept the extra keyword arguments
  transformers 5.24 passes (``TypeError: ... unexpected keyword argument 'kwargs'``): the
  patch is wrapped to accept and ignore them;
* it builds its tract target by downloading a tract binary even with ``--no-verify``
  (which never runs it): the download is replaced by a stand-in that only carries the
  version given with ``--tract-specific-version``.
"""

import sys
from pathlib import Path


def _patch() -> None:
    import torch_to_nnef_llm.models.base as base
    from torch_to_nnef.inference_target import tract as target

    update = base._force_dyn_layer_update_ge4_56

    def accepting(self, key_states, value_states, cache_kwargs=None, *args, **kwargs):
        return update(self, key_states, value_states, cache_kwargs)

    base._force_dyn_layer_update_ge4_56 = accepting

    class NoBinary(target.TractCli):
        def __init__(self, version):
            self.tract_path = Path("/nonexistent/tract")
            self.__dict__["version"] = version  # the cached_property's slot

    target.TractCli.download = classmethod(lambda cls, version: NoBinary(version))


if __name__ == "__main__":
    _patch()
    from torch_to_nnef_llm.cli import main

    sys.argv[0] = "t2n_export_llm_to_tract"
    main()
