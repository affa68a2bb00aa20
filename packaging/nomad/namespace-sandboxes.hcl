# nomad namespace apply namespace-sandboxes.hcl
# Every sandbox job lives here; only the docker driver may run, only on the sandbox pool.
name        = "sandboxes"
description = "Paddock sandboxes (created by controld)"

capabilities {
  enabled_task_drivers  = ["docker"]
  disabled_task_drivers = ["exec", "raw_exec", "java", "qemu"]
}

node_pool_config {
  default = "sandbox"
  allowed = ["sandbox"]
}

meta {
  owner = "paddock"
}
