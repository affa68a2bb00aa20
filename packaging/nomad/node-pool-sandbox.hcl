# nomad node pool apply node-pool-sandbox.hcl
# The dedicated hosts that run untrusted code: clients join it with client.node_pool.
node_pool "sandbox" {
  description = "Paddock sandbox hosts (gVisor, egress-filtered by nodeagent)"

  meta {
    owner = "paddock"
  }
}
