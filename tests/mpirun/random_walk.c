/* Random walkers on a ring-shaped 1-D domain split among MPI ranks.
 *
 * random_walk DOMAIN MAX_STEPS WALKERS_PER_RANK
 *
 * Each rank owns an equal slice of [0, DOMAIN). Every walker starts in its rank's slice with
 * a random number of steps left (< MAX_STEPS) and moves right one cell per step; a walker
 * leaving the slice is sent to the next rank. Rounds repeat until no walker has steps left
 * anywhere. Rank 0 prints the number of walkers that finished and the ranks that took part,
 * so a test can check that every process ran and talked to its neighbours.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct { int position; int steps_left; } walker;

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 4) {
        if (rank == 0) fprintf(stderr, "usage: random_walk DOMAIN MAX_STEPS WALKERS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int domain = atoi(argv[1]), max_steps = atoi(argv[2]), count = atoi(argv[3]);
    if (domain < size) domain = size;
    int width = domain / size, start = rank * width;
    int end = rank == size - 1 ? domain : start + width;
    unsigned seed = 7u * (unsigned)rank + 1u;

    int capacity = count * size + 1, held = count, finished = 0;
    walker *walkers = malloc(sizeof(walker) * (size_t)capacity);
    walker *outgoing = malloc(sizeof(walker) * (size_t)capacity);
    for (int i = 0; i < count; i++) {
        walkers[i].position = start + rand_r(&seed) % (end - start);
        walkers[i].steps_left = rand_r(&seed) % max_steps;
    }
    int next = (rank + 1) % size, previous = (rank + size - 1) % size;
    for (;;) {
        int leaving = 0;
        for (int i = 0; i < held; i++) {
            walker w = walkers[i];
            while (w.steps_left > 0 && w.position < end) { w.position++; w.steps_left--; }
            if (w.steps_left == 0) { finished++; continue; }
            /* Out of steps or out of this slice: a walker with steps left moves on. */
            w.position = w.position % domain;
            outgoing[leaving++] = w;
        }
        int arriving = 0;
        MPI_Sendrecv(&leaving, 1, MPI_INT, next, 0, &arriving, 1, MPI_INT, previous, 0,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Sendrecv(outgoing, leaving * 2, MPI_INT, next, 1, walkers, arriving * 2, MPI_INT,
                     previous, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        held = arriving;
        int moving = 0;
        MPI_Allreduce(&held, &moving, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (moving == 0) break;
    }
    int total = 0, ranks = 0, one = 1;
    MPI_Reduce(&finished, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&one, &ranks, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("walkers finished: %d of %d; ranks: %d\n", total, count * size, ranks);
    free(walkers);
    free(outgoing);
    MPI_Finalize();
    return 0;
}
