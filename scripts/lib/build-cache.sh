# The test command's build cache (sourced by scripts/test.sh): a copy of a
# finished run's target/ kept outside the clone, copied into the next fresh
# clone on this machine before it builds, so a landing run (always a fresh
# clone) does not compile the registry dependencies again for each of its
# profiles and targets.
#
# Only the dependencies are taken from it. The workspace's own crates are
# always rebuilt: cargo judges a path crate fresh by comparing file times, and
# a tree whose sources are older than the cached artifacts but differ from
# what they were built from (a working tree checked out at another commit)
# would otherwise be tested against the cache's build. Their fingerprints are
# removed after each restore, which makes cargo rebuild them and everything
# that depends on them.
#
# Copies, not hard links: cargo rewrites fingerprint files in place, and a
# link would let one tree's build change the cache under another's.
#
#   build_cache_restore   into ./target, when it does not exist yet
#   build_cache_save      ./target into the cache, replacing it whole
#
# Two runs at once are safe: a restore holds a shared lock while it copies,
# a save an exclusive one while it swaps its finished copy in.

BUILD_CACHE_DIR="${CLICKHOUSE_SCHEMA_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/alchemy-clickhouse-schema/build}"
# A cache this large is dropped rather than saved (cargo never removes stale
# artifacts; a dependency bump leaves the old ones behind).
BUILD_CACHE_MAX_GB="${BUILD_CACHE_MAX_GB:-30}"

# The workspace's packages (crates/*), whose units are never taken from the cache.
_build_cache_workspace_packages() {
  sed -n 's/^name = "\(.*\)"$/\1/p' crates/*/Cargo.toml
}

# Removes the fingerprints of the workspace's units under $1, so cargo rebuilds them.
_build_cache_forget_workspace() {
  local pkg
  for pkg in $(_build_cache_workspace_packages); do
    find "$1" -type d -path "*/.fingerprint/$pkg-*" -prune -exec rm -rf {} +
  done
}

build_cache_restore() {
  if [ -e target ]; then
    echo "target/ exists: building in place, nothing restored"
    return 0
  fi
  mkdir -p "$BUILD_CACHE_DIR"
  if [ ! -d "$BUILD_CACHE_DIR/target" ]; then
    echo "no build cache yet ($BUILD_CACHE_DIR): a cold build"
    return 0
  fi
  (
    flock -s 9
    cp -a "$BUILD_CACHE_DIR/target" target.restoring
  ) 9>"$BUILD_CACHE_DIR/lock"
  _build_cache_forget_workspace target.restoring
  mv target.restoring target
  echo "restored $(du -sh target | cut -f1) of dependencies from $BUILD_CACHE_DIR (the workspace's crates are rebuilt)"
}

build_cache_save() {
  mkdir -p "$BUILD_CACHE_DIR"
  local size_gb
  size_gb=$(du -s --block-size=1G target | cut -f1)
  if [ "$size_gb" -gt "$BUILD_CACHE_MAX_GB" ]; then
    echo "target/ is ${size_gb} GB, over BUILD_CACHE_MAX_GB=$BUILD_CACHE_MAX_GB: the cache is dropped, the next run builds cold"
    (flock -x 9 && rm -rf "$BUILD_CACHE_DIR/target") 9>"$BUILD_CACHE_DIR/lock"
    return 0
  fi
  # A save that died half way (its process is gone) left a copy as big as the cache beside it.
  local stale
  for stale in "$BUILD_CACHE_DIR"/target.*; do
    [ -e "$stale" ] || continue
    kill -0 "${stale##*.}" 2>/dev/null || rm -rf "$stale"
  done
  # The copy needs as much room again as target/: without it the old cache stays, rather than a
  # full disk failing the other steps still running beside this one.
  local free_gb
  free_gb=$(df --output=avail --block-size=1G "$BUILD_CACHE_DIR" | tail -1 | tr -dc '0-9')
  if [ "$free_gb" -lt $((size_gb + 2)) ]; then
    echo "only ${free_gb} GB free for a ${size_gb} GB target/: the cache is not saved (the old one, if any, stays)"
    return 0
  fi
  # Copied beside the cache first, so a run that is stopped halfway leaves the old cache whole.
  local next="$BUILD_CACHE_DIR/target.$$"
  rm -rf "$next"
  if ! cp -a target "$next"; then
    rm -rf "$next"
    echo "the copy of target/ failed: the cache is not saved (the old one, if any, stays)"
    return 0
  fi
  # Outputs, not build state: staged addons and WebAssembly artifacts are made again by every run.
  rm -rf "$next/cross/napi-stage" "$next/wasi" "$next/doc"
  _build_cache_forget_workspace "$next"
  (
    flock -x 9
    if [ -d "$BUILD_CACHE_DIR/target" ]; then mv "$BUILD_CACHE_DIR/target" "$BUILD_CACHE_DIR/target.old.$$"; fi
    mv "$next" "$BUILD_CACHE_DIR/target"
  ) 9>"$BUILD_CACHE_DIR/lock"
  rm -rf "$BUILD_CACHE_DIR/target.old.$$"
  echo "saved $(du -sh "$BUILD_CACHE_DIR/target" | cut -f1) to $BUILD_CACHE_DIR"
}
