# babysitter/transport-proxy: FROM scratch plus one layer, rootfs.tar, made by deploy/images/build.sh (the
# stripped `babysitter-transport-proxy` binary, the libraries ldd names, CA bundle, users, empty /tmp /data /home/nonroot).
# Build with deploy/images/build.sh, not by hand: the context is assembled there.
# Writable paths under --read-only: /tmp (tmpfs) and /data (tmpfs or a volume).
FROM scratch
ADD rootfs.tar /
ENV BABYSITTER_TRANSPORT_PROXY__LISTEN=0.0.0.0:8787
USER 65532:65532
WORKDIR /data
EXPOSE 8787
# gRPC Health/Check against the service's own listen address (same config, TLS-aware).
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 CMD ["/usr/bin/babysitter-transport-proxy", "--health-check"]
ENTRYPOINT ["/usr/bin/babysitter-transport-proxy"]
