#!/bin/sh
# A badly behaved "app" for `podvisor init`: it starts helpers in the background and exits
# without waiting for them, as shell entrypoints often do. Their zombies are re-parented to
# the init, which must reap them; the app's exit code must come through unchanged.
#
#   podvisor init -s -- sh examples/init/app.sh
#
for i in 1 2 3 4 5; do
    (sleep 0.2; echo "helper $i done") &
done
echo "app: started 5 helpers, exiting with code 3 without waiting for them"
exit 3
