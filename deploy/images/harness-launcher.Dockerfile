# babysitter/harness-launcher: the worker. Its base (the FROM line is replaced by build.sh) is a
# Debian 12 minbase root filesystem with git, this host's Node 20 and the pinned harness CLIs
# under /opt/harness (on PATH via /usr/local/bin), imported by deploy/images/build.sh: tasks run
# shell commands, node and the agents' CLIs, which scratch cannot offer.
# Writable paths under --read-only: /tmp (tmpfs), /data (task work dirs: tmpfs or a volume) and
# /home/nonroot (the harness CLIs' own config and session files: tmpfs or a volume).
FROM babysitter/worker-base
COPY harness-launcher /usr/bin/harness-launcher
ENV BABYSITTER_LAUNCHER__WORKER__WORK_DIR=/data/work HOME=/home/nonroot
USER 65532:65532
WORKDIR /data
# gRPC Health/Check (same config, TLS-aware); the worker checks its orchestrator connection.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 CMD ["/usr/bin/harness-launcher", "--health-check"]
ENTRYPOINT ["/usr/bin/harness-launcher"]
