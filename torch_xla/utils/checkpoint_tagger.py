"""torch_xla.utils.checkpoint_tagger: name checkpoints ('best', 'latest') and remove
a checkpoint file once no name refers to it."""
import collections
import json


class CheckpointTagger:

    def __init__(self, remover=None):
        self._tags = {}
        self._refs = collections.defaultdict(int)
        self._remover = remover if remover is not None else (lambda path: None)
        if not callable(self._remover):
            raise TypeError("remover must be callable")

    def tag(self, name, path):
        """Point `name` at `path`; the path it pointed at is removed when unreferenced."""
        self._refs[path] += 1
        old = self._tags.get(name)
        if old is not None:
            self._refs[old] -= 1
            if self._refs[old] == 0:
                del self._refs[old]
                self._remover(old)
        self._tags[name] = path

    @property
    def tags(self):
        return self._tags

    def save_to_json(self):
        return json.dumps(self._tags)

    @classmethod
    def load_from_json(cls, str_json, remover=None):
        tagger = cls(remover=remover)
        for name, path in json.loads(str_json).items():
            tagger.tag(name, path)
        return tagger
