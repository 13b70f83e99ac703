# The podvisor image: podvisor's static PID 1 build and nothing else. Built by
# scripts/build-images; use it as a base, or copy /podvisor into your own image (docs/init.md).
FROM scratch
COPY podvisor /podvisor
ENTRYPOINT ["/podvisor", "init", "--"]
