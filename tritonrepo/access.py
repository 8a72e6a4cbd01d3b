"""Who may change what a tritonserver of this project runs: the restricted APIs and the header opening them.

The APIs below let a client change what the server runs or reads. The launcher (tritonlocal) refuses them
unless a request carries the key in ``ADMIN_HEADER``, the clients send that header, and the copies that
must stand alone (the deployments' probe, compose and the Kubernetes manifests) are checked against these
values by tests/unit/test_admin_header.py.
"""

from __future__ import annotations

RESTRICTED_HTTP_APIS = ("model-repository", "model-config", "shared-memory", "logging", "trace")
RESTRICTED_GRPC_PROTOCOLS = ("model-repository", "model-config", "shared-memory", "logging", "trace")
ADMIN_HEADER = "triton-admin-key"
