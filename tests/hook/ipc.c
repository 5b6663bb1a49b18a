/* A program whose threads talk through message queues and System V
 * semaphores, run plain (real threads: the reference), under iofiber-run
 * and with the header swap, where its threads are fibers sharing one OS
 * thread (a wait that blocked that thread would deadlock: the peer could
 * never run):
 * - a producer and a consumer pass 200 numbered messages through a POSIX
 *   queue that holds 2: all arrive, in order;
 * - 4 threads add 1 to a counter 20 times each under a System V semaphore
 *   used as a lock, held across a sleep: the count is exact;
 * - two threads play 100 rounds of ping-pong through a System V message
 *   queue;
 * - alarm() around semop with an SA_RESTART handler: EINTR (System V
 *   calls are never restarted); around mq_receive with SA_RESTART: the
 *   wait goes on to a message a thread sends later; without: EINTR.
 * Prints "all steps right" when every step is. */
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <time.h>
#include <unistd.h>

#define STEPS_NAME "ipc"
#include "steps.h"

#define MESSAGES 200
#define ADDERS 4
#define ROUNDS 20
#define PINGS 100

static mqd_t mq;
static int sem_id, msg_id, counter;

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *producer(void *p) {
  (void)p;
  for (int i = 0; i < MESSAGES; i++) {
    char m[16];
    int n = snprintf(m, sizeof m, "%d", i);
    CHECK(mq_send(mq, m, (size_t)n, 0) == 0, "mq_send");
  }
  return NULL;
}

static void *consumer(void *p) {
  int *in_order = p;
  for (int i = 0; i < MESSAGES; i++) {
    char m[64] = {0};
    ssize_t n = mq_receive(mq, m, sizeof m, NULL);
    CHECK(n > 0, "mq_receive");
    char want[16];
    snprintf(want, sizeof want, "%d", i);
    if (n > 0 && strcmp(m, want) == 0) (*in_order)++;
  }
  return NULL;
}

static void *adder(void *p) {
  (void)p;
  struct sembuf down = {0, -1, SEM_UNDO}, up = {0, 1, SEM_UNDO};
  for (int r = 0; r < ROUNDS; r++) {
    CHECK(semop(sem_id, &down, 1) == 0, "semop down");
    int v = counter;
    usleep(300);
    counter = v + 1;
    CHECK(semop(sem_id, &up, 1) == 0, "semop up");
  }
  return NULL;
}

typedef struct msg {
  long type;
  int n;
} msg;

/* Type 1 goes to the ponger, type 2 back. */
static void *ponger(void *p) {
  (void)p;
  for (int i = 0; i < PINGS; i++) {
    msg m;
    CHECK(msgrcv(msg_id, &m, sizeof m.n, 1, 0) == sizeof m.n, "msgrcv ping");
    m.type = 2;
    m.n++;
    CHECK(msgsnd(msg_id, &m, sizeof m.n, 0) == 0, "msgsnd pong");
  }
  return NULL;
}

static void *late_sender(void *p) {
  (void)p;
  usleep(1500000);
  CHECK(mq_send(mq, "late", 4, 0) == 0, "the late send");
  return NULL;
}

static volatile sig_atomic_t alarms;
static void on_alarm(int sig) {
  (void)sig;
  alarms++;
}

static void alarm_handler(int flags) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = flags;
  CHECK(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction");
}

int main(void) {
  char name[64];
  snprintf(name, sizeof name, "/iof-hook-ipc-%d", (int)getpid());
  struct mq_attr a = {0};
  a.mq_maxmsg = 2;
  a.mq_msgsize = 64;
  mq = mq_open(name, O_RDWR | O_CREAT | O_EXCL, 0600, &a);
  CHECK(mq != (mqd_t)-1, "mq_open");
  mq_unlink(name);
  pthread_t t[ADDERS];
  int in_order = 0;
  CHECK(pthread_create(&t[0], NULL, consumer, &in_order) == 0, "create");
  CHECK(pthread_create(&t[1], NULL, producer, NULL) == 0, "create");
  for (int i = 0; i < 2; i++) CHECK(pthread_join(t[i], NULL) == 0, "join");
  CHECK(in_order == MESSAGES, "every message, in order");

  sem_id = semget(IPC_PRIVATE, 1, IPC_CREAT | 0600);
  CHECK(sem_id >= 0, "semget");
  struct sembuf one = {0, 1, 0};
  CHECK(semop(sem_id, &one, 1) == 0, "the lock starts free");
  for (int i = 0; i < ADDERS; i++)
    CHECK(pthread_create(&t[i], NULL, adder, NULL) == 0, "create");
  for (int i = 0; i < ADDERS; i++) CHECK(pthread_join(t[i], NULL) == 0, "join");
  CHECK(counter == ADDERS * ROUNDS, "the semaphore kept the count exact");

  msg_id = msgget(IPC_PRIVATE, IPC_CREAT | 0600);
  CHECK(msg_id >= 0, "msgget");
  CHECK(pthread_create(&t[0], NULL, ponger, NULL) == 0, "create");
  int last = 0;
  for (int i = 0; i < PINGS; i++) {
    msg m = {1, last};
    CHECK(msgsnd(msg_id, &m, sizeof m.n, 0) == 0, "msgsnd ping");
    CHECK(msgrcv(msg_id, &m, sizeof m.n, 2, 0) == sizeof m.n, "msgrcv pong");
    last = m.n;
  }
  CHECK(pthread_join(t[0], NULL) == 0, "join");
  CHECK(last == PINGS, "every ping answered");

  /* System V waits end with EINTR, SA_RESTART or not. */
  alarm_handler(SA_RESTART);
  struct sembuf two = {0, -2, 0};
  alarm(1);
  int64_t t0 = mono_ms();
  errno = 0;
  CHECK(semop(sem_id, &two, 1) == -1 && errno == EINTR,
        "the alarm ends semop with EINTR");
  CHECK(alarms == 1 && mono_ms() - t0 < 2500, "after the alarm");

  /* A queue's wait goes on after an SA_RESTART handler... */
  CHECK(pthread_create(&t[0], NULL, late_sender, NULL) == 0, "create");
  char m[64];
  alarm(1);
  t0 = mono_ms();
  CHECK(mq_receive(mq, m, sizeof m, NULL) == 4, "SA_RESTART: mq_receive");
  CHECK(alarms == 2 && mono_ms() - t0 >= 1200, "the message after the alarm");
  CHECK(pthread_join(t[0], NULL) == 0, "join");
  /* ...and ends with EINTR after one without. */
  alarm_handler(0);
  alarm(1);
  t0 = mono_ms();
  errno = 0;
  CHECK(mq_receive(mq, m, sizeof m, NULL) == -1 && errno == EINTR,
        "the alarm ends mq_receive with EINTR");
  CHECK(alarms == 3 && mono_ms() - t0 < 2500, "after the last alarm");
  alarm(0);

  semctl(sem_id, 0, IPC_RMID);
  msgctl(msg_id, IPC_RMID, NULL);
  mq_close(mq);
  if (!failed) printf("all steps right\n");
  return failed;
}
