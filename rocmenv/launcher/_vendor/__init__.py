"""Third-party code vendored for the in-container launcher (see scripts/vendor-packaging.sh)."""
