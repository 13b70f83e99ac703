//! Integration tests of the `podvisor` binary: one test binary, modules per face (ripgrep's
//! layout), on the small harness in `harness/`.

// Test code reads top to bottom: the 120-line limit (clippy.toml) is for product code.
#![allow(clippy::too_many_lines)]

mod addons;
mod api;
mod api_clients;
mod architecture;
mod cli;
mod conditions;
mod deadline;
mod devices;
mod disks;
mod dns;
mod docker;
mod docs;
mod escalation;
mod examples;
mod exec;
mod explain;
mod failpoints;
mod fuzzing;
mod grpc;
mod guest_v2;
mod harness;
mod hooks;
mod images;
mod init;
mod init_staged;
mod keeper_memory;
mod keeper_protocol;
mod live_restore;
mod mount_options;
mod namespaces;
mod node;
mod personas;
mod pods;
mod probes;
mod resize;
mod resources;
mod restart_rules;
mod resume;
mod rootfs;
mod run;
mod run_reading;
mod security;
mod stdio;
mod subids;
mod termination;
mod top;
mod validate;
mod vm;
mod vm_old_kernel;
mod volumes;
