"""``phalanx.data``: what a training loop uses to read its data through the node's sample cache.

```python
from phalanx.data import CachedDataset, SampleCache

cache = SampleCache("/var/cache/phalanx/samples/imagenet", capacity_bytes=64 * 2**30)
dataset = CachedDataset(keys, load_sample, cache)  # load_sample(key) -> bytes, from the slow source
for epoch in range(epochs):
    for sample in dataset.shuffled(seed=epoch):
        ...
```
"""

from phalanx.data.sample_cache import CachedDataset, SampleCache, SampleCacheError, SampleCacheWriteError

__all__ = ["CachedDataset", "SampleCache", "SampleCacheError", "SampleCacheWriteError"]
