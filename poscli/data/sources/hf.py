"""``--data hf:NAME[:CONFIG]``: a dataset on the Hugging Face hub, through ``datasets.load_dataset``
(online; the rows become documents as ``RowOptions`` say).

Offline, a hub name fails at once: the hub's offline mode is switched on when huggingface.co does
not answer within a few seconds, so ``datasets`` does not retry for minutes.
"""

from __future__ import annotations

import os

from poscli.data.sources import register
from poscli.data.sources.base import DatasetSource
from poscli.errors import PoscliError

HUB_TIMEOUT_S = 3.0


@register("hf")
class HubDataset(DatasetSource):
    summary = "a dataset on the Hugging Face hub (online), e.g. hf:Salesforce/wikitext:wikitext-103-raw-v1"
    form = "hf:NAME[:CONFIG]"
    priority = 40
    named = True
    online = True

    @classmethod
    def matches(cls, spec: str) -> bool:
        return spec.startswith("hf:")

    def name_and_config(self) -> tuple[str, str | None]:
        """hf:NAME[:CONFIG] -> (NAME, CONFIG or None); a missing name is the user's one-line error."""
        name, _, config = self.spec[3:].partition(":")
        if not name:
            raise PoscliError("--data hf: needs a dataset name, e.g. --data hf:Salesforce/wikitext:wikitext-103-raw-v1")
        return name, config or None

    def load_arguments(self) -> tuple[tuple, dict]:
        name_and_config = self.name_and_config()
        if os.environ.get("HF_HUB_OFFLINE") != "1" and not hub_reachable():
            go_offline()  # fail now, from the cache or not at all, instead of minutes of retries
        return name_and_config, {}

    def cache_key(self) -> list:
        self.name_and_config()  # checked before anything is cached under its name
        return ["hf", self.spec, *self.options.key()]


def hub_reachable(timeout: float = HUB_TIMEOUT_S) -> bool:
    """Whether the hub answers an HTTPS request within ``timeout`` seconds (any HTTP status counts:
    a TCP connection alone can be accepted by a firewall that then drops everything)."""
    import urllib.error
    import urllib.request

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        urllib.request.urlopen(
            urllib.request.Request(endpoint + "/api/datasets?limit=1", method="HEAD"), timeout=timeout
        ).close()
        return True
    except urllib.error.HTTPError:
        return True  # the hub answered, if not with 200
    except (OSError, ValueError):  # URLError, timeouts, refused connections, a malformed endpoint
        return False


def go_offline() -> None:
    """The hub's offline mode, for this process: set before ``datasets`` is imported it is read
    from the environment; after, the libraries' flags are set too."""
    import sys

    os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
    if "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].constants.HF_HUB_OFFLINE = True
    if "datasets" in sys.modules:
        sys.modules["datasets"].config.HF_HUB_OFFLINE = True
