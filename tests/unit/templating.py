# Copyright: gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Load the collection's YAML and template its expressions as Ansible does, on ansible-core 2.16 to 2.21.

ansible-core 2.19 templates only what is trusted (trust_as_template, and
DataLoader.load_from_file(..., trusted_as_template=True)) and gave Templar
evaluate_conditional; 2.16 to 2.18 trust every string and evaluate a
conditional by templating it inside an if block.
"""

from __future__ import annotations

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

try:
    from ansible.template import trust_as_template
    _TRUSTED = {"trusted_as_template": True}
except ImportError:  # ansible-core 2.16 to 2.18: every string is a template
    def trust_as_template(value):
        return value
    _TRUSTED = {}

__all__ = ["DataLoader", "Templar", "evaluate_conditional", "load_yaml", "trust_as_template"]


def load_yaml(loader, path):
    """A YAML file's data, its strings templatable as Ansible's own loading of a play or role makes them."""
    return loader.load_from_file(path, **_TRUSTED)


def evaluate_conditional(templar, condition):
    """A `when:`/`that:` condition's truth, as the running ansible-core evaluates it."""
    if hasattr(templar, "evaluate_conditional"):
        return templar.evaluate_conditional(trust_as_template(condition))
    if isinstance(condition, bool):
        return condition
    rendered = templar.template("{%% if %s %%} True {%% else %%} False {%% endif %%}" % condition)
    return rendered.strip() == "True"
