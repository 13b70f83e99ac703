# An example app image, FROM scratch: busybox (Debian's busybox-static) for a shell and tools,
# podvisor's test helper, and podvisor copied from the podvisor image as a user's image would
# take it. Built by scripts/build-images, used by the Docker tests and compose.yaml.
ARG PODVISOR=podvisor:latest
FROM ${PODVISOR} AS podvisor

FROM scratch
COPY rootfs/ /
COPY --from=podvisor /podvisor /podvisor
ENV PATH=/bin
ENTRYPOINT ["/podvisor", "init", "--"]
CMD ["sh"]
