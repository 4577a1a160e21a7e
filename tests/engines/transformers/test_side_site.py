"""The side site on the path leaves transformers' model classes importable in the same process (fk's own, which
writes the seeded weights of every scenario of a suite in turn)."""
import os
import subprocess
import sys

import pytest

from fk_adapters.engines.transformers.libraries import side_site

AFTER_THE_SIDE_SITE = """
import os, sys
from fk_adapters.engines.transformers.libraries import side_site
side_site.on_path()
assert side_site.folder() in sys.path
import transformers
print(transformers.BertModel.__name__)
"""


@pytest.mark.skipif(not os.path.isdir(os.path.join(side_site.folder(), "torchvision")),
                    reason="the side site holds no torchvision here")
def test_a_transformers_model_class_imports_after_the_side_site_entered_the_path():
    done = subprocess.run([sys.executable, "-c", AFTER_THE_SIDE_SITE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "BertModel", done.stderr[-2000:]
