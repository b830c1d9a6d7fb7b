# The runner and controller image. tini is PID 1 so that processes orphaned by tasks are reaped
# (Node does not reap children it did not spawn) when the image runs as it is. In the controller's
# pods the container command replaces this entrypoint; there the pod shares its PID namespace and
# the sandbox's pause process reaps instead.
FROM node:24-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY test/bench ./test/bench
RUN npm ci --ignore-scripts && npx tsc -p tsconfig.build.json && npm prune --omit=dev --ignore-scripts

FROM node:24-bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends tini procps util-linux && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/playbook
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist ./dist
COPY package.json ./
RUN ln -s /opt/playbook/dist/src/cli/main.js /usr/local/bin/playbook && chmod +x dist/src/cli/main.js
USER 65532:65532
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["playbook", "--help"]
