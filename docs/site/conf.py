# Sphinx configuration of the gpufleet.nvidia documentation site (make docs, scripts/docs-build.sh).
# The pages are reStructuredText that antsibull-docs writes from the collection: its plugins' and
# roles' own documentation and the guides of docs/docsite; index.rst beside this file is the front page.

project = 'gpufleet.nvidia'
copyright = 'gpufleet.nvidia contributors'

title = 'gpufleet.nvidia documentation'
html_short_title = 'gpufleet.nvidia'
html_title = 'gpufleet.nvidia documentation'

extensions = ['sphinx_antsibull_ext']

pygments_style = 'ansible'
highlight_language = 'YAML+Jinja'

html_theme = 'sphinx_ansible_theme'
html_show_sphinx = False
html_theme_options = {
    'collapse_navigation': False,
    'display_version': False,
    'show_extranav': False,
    'show_rtd_ethical_ads': False,
    'topbar_links': {
        'Source': 'https://github.com/gpufleet/nvidia',
    },
}

html_use_smartypants = True
html_use_modindex = False
html_use_index = False
html_copy_source = False

# The site is built offline: no intersphinx inventories are fetched, so every reference must
# resolve inside the site (nitpicky: an unresolved one is a warning, and warnings fail the build).
default_role = 'any'
nitpicky = True

# References to other collections (ansible.builtin, kubernetes.core) and to Ansible's own guides
# resolve on docs.ansible.com, which an offline build cannot read: they are shown as plain text.
# Every reference inside this collection must still resolve.
nitpick_ignore_regex = [
    ('ref', r'ansible_collections\.(ansible\.builtin|kubernetes\.core)\..*'),
    ('ref', r'(ansible_configuration_settings|common_return_values|action_plugins)'),
]
