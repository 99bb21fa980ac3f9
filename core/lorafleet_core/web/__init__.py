"""HTTP plumbing shared by the servers: the edge protocol with header and body limits
(`http_protocol`), request ids (`request_ids`), work whose client has left (`client_gone`),
credentials read from mounted files (`secret_file`)."""
