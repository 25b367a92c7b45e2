"""Programs and references for the grader's tests, written for them (issue 45): each task has an
honest program (right on every case) and wrong ones, so that a test's expected score is the task's
own truth."""
