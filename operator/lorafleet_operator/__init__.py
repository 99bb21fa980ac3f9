"""lorafleet operator: pure planners (`planning`) and the kopf handlers that apply them.

`kopf run --module lorafleet_operator` and `python -m lorafleet_operator` both import this
package, which registers the handlers. Standalone mode imports only `planning`, which needs
neither kopf nor a cluster; so handlers are registered only where kopf is installed.
"""

import importlib.util

if importlib.util.find_spec("kopf") is not None:
    from lorafleet_operator import handlers as handlers
