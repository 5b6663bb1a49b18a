# Draws iof-bench's network figures from its CSV output (iof-bench --csv):
#   OUTDIR/echo-throughput.png  echo round trips/s vs connections, one line
#                               per server, 64-byte and 4 KiB messages
#   OUTDIR/echo-instructions.png  instructions per round trip (rows ir.*,
#                               present with --callgrind)
# Usage: gnuplot -e "csv='build/bench.csv'; outdir='docs/img'" bench/plot.gp
# (scripts/bench.sh --report runs the suite and this script).
if (!exists("csv")) csv = "build/bench.csv"
if (!exists("outdir")) outdir = "docs/img"
if (!exists("subtitle")) subtitle = ""

set datafile separator whitespace
set terminal pngcairo size 1000,520 font "sans,10"
peers = "libev iofiber libuv st threads"

# rows "echo,PEER.cN.SIZE,..." with status ok -> "N rt/s". A peer's point
# is libev's round trips/s divided by the peer's ratio (the median of its
# interleaved pair ratios), so the lines keep the ratios' steadiness on a
# loaded machine; libev's own point is its median.
series(p, size) = sprintf("< awk -F, '$1==\"echo\" && $12==\"ok\" {med[$2]=$4; split($2,f,\".\"); if (f[1]==\"%s\" && f[3]==\"%s\") print substr(f[2],2), ($7==\"\" ? 1e9/$4 : 1e9/(med[$7]*$8))}' %s", p, size, csv)

count(re) = int(system(sprintf("awk -F, '$1==\"echo\" && $12==\"ok\" && $2 ~ /%s/' %s | wc -l", re, csv)))
n4k = count("\\.4K$")
nir = count("^ir\\.")

set output outdir."/echo-throughput.png"
set multiplot layout 1,(n4k > 0 ? 2 : 1) title "iof-bench echo: round trips per second over loopback (higher is better)".subtitle
set logscale x
set xtics (1, 64, 1000)
set xrange [0.7:1500]
set xlabel "connections"
set ylabel "round trips/s"
set format y "%.0s%c"
set key top left
set yrange [0:*]
set grid
set title "64-byte messages"
plot for [p in peers] series(p, "64B") using 1:2 with linespoints lw 2 title p
if (n4k > 0) {
  set title "4 KiB messages"
  plot for [p in peers] series(p, "4K") using 1:2 with linespoints lw 2 title p
}
unset multiplot
if (nir == 0) exit

set output outdir."/echo-instructions.png"
unset logscale x
unset xrange
set xtics auto
set title "iof-bench echo --callgrind: user-space instructions per round trip (lower is better)".subtitle
set xlabel "server"
set ylabel "instructions / round trip"
set format y "%g"
set style fill solid 0.7
set boxwidth 0.6
set yrange [0:*]
unset key
ir = sprintf("< awk -F, '$1==\"echo\" && $12==\"ok\" && $2 ~ /^ir\\./ && $2 !~ /_500$/ {print NR, substr($2,4), $4}' %s", csv)
plot ir using 0:3:xtic(2) with boxes, \
     ir using 0:3:(sprintf("%.0f", $3)) with labels offset 0,1
