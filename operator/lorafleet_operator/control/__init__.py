"""The control API: HTTP for pipelines and operators that do not speak Kubernetes.

`app.build_control_app` holds the routes; `auth` the admin credential (and ServiceAccount tokens
by TokenReview on a cluster); `store` where objects are read and written (the cluster through the
operator's client, or a standalone manifests folder) and where replicas are; `serve` runs it
next to the operator (started by the operator's startup handler) or on its own
(`python -m lorafleet_operator.control`, what `lorafleet up` starts).
"""
