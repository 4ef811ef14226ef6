"""The generic DDP parts: any data, model and task can use them, and none
of them imports a molecule part.

    errors       one `error:` line and a non-zero exit on every rank, never a traceback
    logs         rank 0 tells the story; each rank its own log file
    distributed  threads per process, seeds per rank, digests, object collectives,
                 and what restarts across nodes need (rendezvous, job keys, heartbeat)
    data         the typed Batch, TrainingData, fixed-size feature datasets
    sampler      batch samplers that shard every global batch across ranks
    loaders      get_dataloader / get_ddp_dataloader
    files        atomic writes, the cache folder, one builder per node (a file lock)
    checkpoint   snapshots and resume, the saved model folder
    preemption   SIGTERM: every rank stops after the same step
    run_dir      the run's output folder, agreed by every rank, with its config.yaml
    evaluation   model outputs over a loader
    report       metrics.json, figures and TensorBoard at the end of a run
    html_report  report.html: the run on one page, without TensorBoard
    plots        the figures (matplotlib, imported when drawing)
    config       --config files and each run's config.yaml
    flags        the scripts' argparse parser
    optimization the optimizer's steps: their flags, the lr schedule, gradient clipping
"""
