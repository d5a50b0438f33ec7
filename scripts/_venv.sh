# Shared by the scripts/<tool>_venv.sh set-up scripts (sourced, not run): each tool that must not
# share practicum's venv gets its own, created once and marked by VENV/.installed.
#   install() { venv_pip "pkg==1.0" ...; }        the tool's pip commands
#   venv_once VENV LABEL DURATION CHECK            CHECK: python code that imports the tool
# venv_once prints the venv's python on stdout; everything else goes to stderr.

venv_pip() {
  "$PY" -m pip install -q "$@" 2>&1 | grep -v "^WARNING: Location" >&2 || true
}

venv_once() {
  VENV="$1"
  PY="$VENV/bin/python"
  if [ ! -f "$VENV/.installed" ]; then
    echo "practicum: setting up $VENV for $2 ($3)" >&2
    [ -x "$PY" ] || python3 -m venv "$VENV"
    install
    "$PY" -c "$4" >&2 || { echo "practicum: $2 did not install" >&2; exit 1; }
    touch "$VENV/.installed"
  fi
  echo "$PY"
}
