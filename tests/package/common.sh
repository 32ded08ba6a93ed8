# Sourced by the package tests (test_install.sh, test_deb.sh). Each runs its
# steps one at a time; a failing step is named, with its command and output.
# The caller sets scratch (its own directory), libdir (the build's
# CMAKE_INSTALL_LIBDIR), version (the project's), cc and pkg_config.

consumer_src=$(dirname "$0")/consumer
major=${version%%.*}

# The consumers run under brisk's defaults: these tests check the install,
# and an option may print on stderr (BRISK_STATS, BRISK_VERBOSE, a refused
# value), which a consumer's check reads with its output.
for option in $(env | sed -n 's/^\(BRISK_[A-Z_]*\)=.*/\1/p'); do
  unset "$option"
done

fail() {
  echo "FAILED: $*" >&2
  exit 1
}

# step WHAT COMMAND [ARG...]: runs COMMAND, its output in $scratch/step.log.
step() {
  what=$1
  shift
  if ! "$@" >"$scratch/step.log" 2>&1; then
    echo "FAILED: $what" >&2
    echo "  command: $*" >&2
    sed 's/^/  | /' "$scratch/step.log" >&2
    exit 1
  fi
}

# expect_lines WHAT FILE MODE PATTERN...: each PATTERN is in FILE. MODE is
# grep's: -E (an extended regex matching in a line) or -Fx (a whole line).
expect_lines() {
  what=$1 file=$2 mode=$3
  shift 3
  for pattern in "$@"; do
    if ! grep $mode -q -- "$pattern" "$file"; then
      echo "FAILED: $what: no line matches '$pattern' (grep $mode) in:" >&2
      sed 's/^/  | /' "$file" >&2
      exit 1
    fi
  done
}

# expect_install WHAT LIST TOP: LIST (a file: one path per line, a link as
# "PATH -> TARGET") names every file an install puts under TOP.
expect_install() {
  top=$3
  expect_lines "$1" "$2" -Fx \
    "$top/$libdir/libbrisk.so.$version" \
    "$top/$libdir/libbrisk.so.$major -> libbrisk.so.$version" \
    "$top/$libdir/libbrisk.so -> libbrisk.so.$major" \
    "$top/$libdir/libbrisk.a" \
    "$top/$libdir/libbrisk-secure.so.$version" \
    "$top/$libdir/libbrisk-secure.so.$major -> libbrisk-secure.so.$version" \
    "$top/$libdir/libbrisk-secure.so -> libbrisk-secure.so.$major" \
    "$top/$libdir/libbrisk-secure.a" \
    "$top/include/brisk.h" \
    "$top/include/brisk/internal.h" \
    "$top/include/brisk/malloc.h" \
    "$top/include/brisk/stats.h" \
    "$top/include/brisk/region.h" \
    "$top/include/brisk/arena.h" \
    "$top/include/brisk/stack.h" \
    "$top/include/brisk/fifo.h" \
    "$top/include/brisk/pool.h" \
    "$top/include/brisk/buddy.h" \
    "$top/include/brisk/hybrid.h" \
    "$top/$libdir/pkgconfig/brisk.pc" \
    "$top/$libdir/cmake/brisk/briskConfig.cmake" \
    "$top/$libdir/cmake/brisk/briskConfigVersion.cmake" \
    "$top/$libdir/cmake/brisk/briskTargets.cmake"
}

# run_consumer WHAT PROGRAM LIBDIR [LIBRARY]: PROGRAM runs with LIBDIR as its
# library path and prints OK. With a LIBDIR it must load LIBRARY.so.MAJOR
# (the SONAME; LIBRARY is libbrisk unless given) from there; without one (a
# static link) no libbrisk at all.
run_consumer() {
  what=$1 program=$2 from=$3 library=${4:-libbrisk}
  step "$what: ldd" env LD_LIBRARY_PATH="$from" ldd "$program"
  if [ -n "$from" ]; then
    grep -Fq "$library.so.$major => $from/$library.so.$major " "$scratch/step.log" ||
      fail "$what: $library.so.$major is not $from's:$(echo; cat "$scratch/step.log")"
  elif grep -q libbrisk "$scratch/step.log"; then
    fail "$what: a static link loads libbrisk:$(echo; cat "$scratch/step.log")"
  fi
  step "$what: run" env LD_LIBRARY_PATH="$from" "$program"
  [ "$(cat "$scratch/step.log")" = OK ] ||
    fail "$what printed, instead of OK:$(echo; cat "$scratch/step.log")"
}

# pkg_config_consumers PCDIR LIBDIR [PKG-CONFIG OPTION...]: builds the consumer
# with the flags pkg-config gives for the brisk.pc in PCDIR (the only place
# it searches), linked to libbrisk.so and, with --static, to libbrisk.a, and
# runs both.
pkg_config_consumers() {
  pcdir=$1 from=$2
  shift 2
  step "pkg-config --cflags --libs brisk" \
    env -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR="$pcdir" "$pkg_config" "$@" --cflags --libs brisk
  flags=$(cat "$scratch/step.log")
  step "pkg-config --static --libs brisk" \
    env -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR="$pcdir" "$pkg_config" "$@" --static --libs brisk
  static_libs=$(cat "$scratch/step.log")
  step "pkg-config --cflags brisk" \
    env -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR="$pcdir" "$pkg_config" "$@" --cflags brisk
  cflags=$(cat "$scratch/step.log")
  # The flags are word lists: unquoted on purpose.
  step "cc with pkg-config's flags ($flags)" \
    "$cc" -Wall -Wextra -Werror -o "$scratch/pkg_config_shared" "$consumer_src/main.c" $flags
  run_consumer "pkg-config consumer (libbrisk.so)" "$scratch/pkg_config_shared" "$from"
  step "cc with pkg-config --static's flags ($cflags -Wl,-Bstatic $static_libs -Wl,-Bdynamic)" \
    "$cc" -Wall -Wextra -Werror -o "$scratch/pkg_config_static" "$consumer_src/main.c" $cflags \
    -Wl,-Bstatic $static_libs -Wl,-Bdynamic
  run_consumer "pkg-config consumer (libbrisk.a)" "$scratch/pkg_config_static" ""
  step "cc no_malloc.c with pkg-config --static's flags" \
    "$cc" -Wall -Wextra -Werror -o "$scratch/pkg_config_no_malloc" "$consumer_src/no_malloc.c" \
    $cflags -Wl,-Bstatic $static_libs -Wl,-Bdynamic
  run_consumer "pkg-config consumer naming no malloc (libbrisk.a)" "$scratch/pkg_config_no_malloc" ""
}
