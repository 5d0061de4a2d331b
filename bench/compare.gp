# Plot of bench/compare's hit section: ns per get+put (per thread) against
# the number of cached regions, libmrmgr and UCX, 1 and 2 threads.
#   gnuplot -e "datafile='bench-compare-hit.dat'; outfile='hit.png'" compare.gp
if (!exists("datafile")) datafile = 'bench-compare-hit.dat'
if (!exists("outfile")) outfile = 'bench-compare-hit.png'
set terminal pngcairo size 900,560 font ",11" noenhanced
set output outfile
set title "Cache hit: get+put of a random 4 KiB page of one of N 64 KiB regions"
set xlabel "cached regions"
set ylabel "ns per get+put, per thread (median)"
set logscale x
set logscale y
set format x "%.0s%c"
set grid xtics ytics mytics
set key bottom right
plot datafile using 1:2 with linespoints lw 2 pt 7 lc rgb "#1f77b4" title "libmrmgr, 1 thread", \
     datafile using 1:4 with linespoints lw 2 pt 5 dt 2 lc rgb "#1f77b4" title "libmrmgr, 2 threads", \
     datafile using 1:($3 > 0 ? $3 : NaN) with linespoints lw 2 pt 7 lc rgb "#d62728" title "UCX rcache, 1 thread", \
     datafile using 1:($5 > 0 ? $5 : NaN) with linespoints lw 2 pt 5 dt 2 lc rgb "#d62728" title "UCX rcache, 2 threads"
