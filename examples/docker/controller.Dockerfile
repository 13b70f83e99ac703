# The cluster controller's image: its static build and nothing else (it reaches the API server
# by its in-cluster address and service account CA, so it needs no certificates or resolver
# files). Built by scripts/build-images; deployed by deploy/controller.yaml.
FROM scratch
COPY podvisor-controller /podvisor-controller
USER 65532:65532
ENTRYPOINT ["/podvisor-controller"]
