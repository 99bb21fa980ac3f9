"""HTTP plumbing shared by the servers: the edge protocol with header and body limits
(`http_protocol`), what an edge does before a route runs (`asgi_edge`), request ids
(`request_ids`), work whose client has left (`client_gone`), credentials read from mounted
files (`secret_file`)."""
