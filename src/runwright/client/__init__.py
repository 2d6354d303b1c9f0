"""The client side: what a program that submits and follows runs calls, through the App
or a tenant's view (scope), and the handles, thread, following, listing, attempts and
schedule operations behind it. Above the engine; it reaches the store only through its
interface."""
