# Nomad client configuration for a sandbox host (drop into /etc/nomad.d/ next to the
# agent's own config). Only sandbox jobs are placed on these clients: they join the node
# pool "sandbox" and the namespace "sandboxes" points there (namespace-sandboxes.hcl).
client {
  enabled    = true
  node_pool  = "sandbox"
  node_class = "sandbox"

  # The CNI networks controld asks for: cni/sandbox-no-egress, cni/sandbox-restricted,
  # cni/sandbox-open (the .conflist files in /usr/share/paddock/cni).
  cni_path       = "/opt/cni/bin"
  cni_config_dir = "/opt/cni/config"

  # Nothing but sandboxes: no exec/raw_exec tasks on these hosts.
  options = {
    "driver.allowlist" = "docker"
  }
}

plugin "docker" {
  config {
    # runsc: gVisor with --network=none (deny_all); runsc-net: gVisor's own network stack
    # inside the CNI network namespace (restricted, open); runsc-hostnet: the host-network
    # fallback, for nodes where runsc's netstack cannot start (the node's daemon.json then
    # defines runsc-net that way and its agent reports it). All in Docker's daemon.json.
    # runc stays allowed for Nomad's own pause containers only; jobs always ask for runsc.
    allow_runtimes = ["runc", "runsc", "runsc-net", "runsc-hostnet"]

    # Upper bound for a job's pids_limit (controld sends 4096 by default, [docker] pids_limit).
    pids_limit = 4096

    # Sandbox jobs drop every capability and add ALL back: the capabilities live inside the
    # gVisor sentry, not on the host kernel. That needs "all" here.
    allow_caps = ["all"]

    allow_privileged = false

    # Enabled for the in-sandbox agent only: controld's sandbox jobs bind one host path,
    # the agent binary (/usr/lib/paddock/paddock-init, read-only), and mount a 64 KiB tmpfs
    # volume of the local driver for its socket. Tenants never choose a mount: the job spec
    # is controld's. Without the agent ([nomad] relay_secret_file unset) this can be false.
    # Persistent data goes through CSI volumes.
    volumes {
      enabled = true
    }

    # Images: committed snapshots are removed by the agent; keep pulled templates warm.
    gc {
      image       = true
      image_delay = "1h"
      container   = true
    }

    extra_labels = ["job_name", "namespace", "node_name"]
  }
}
